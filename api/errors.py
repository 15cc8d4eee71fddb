"""The API's errors: each renders as {"error": {"code", "message"}} with its status."""

from __future__ import annotations

from werkzeug.exceptions import HTTPException


class ApiError(HTTPException):
    """An error with a machine-readable code, rendered as {"error": {"code", "message"}}."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(description=message)
        self.code = status
        self.error_code = code

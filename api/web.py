"""GET /: a small page that shows the current boards (no external assets), and the API's
description at GET /openapi.yaml."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response, render_template

from toplist.config import WINDOWS

web = Blueprint("web", __name__)

OPENAPI = Path(__file__).with_name("openapi.yaml")


@web.get("/")
def index() -> str:
    return render_template("index.html", windows=WINDOWS)


@web.get("/openapi.yaml")
def openapi() -> Response:
    return Response(OPENAPI.read_bytes(), mimetype="application/yaml")

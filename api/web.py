"""GET /: a small page that shows the current boards (no external assets)."""

from __future__ import annotations

from flask import Blueprint, render_template

from toplist.config import WINDOWS

web = Blueprint("web", __name__)


@web.get("/")
def index() -> str:
    return render_template("index.html", windows=WINDOWS)

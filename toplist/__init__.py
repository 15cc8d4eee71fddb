"""Toplist: near-real-time top-K leaderboards on ClickHouse."""

__version__ = "0.1.0"

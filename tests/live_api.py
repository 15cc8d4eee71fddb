"""A real HTTP server on a free port, serving the Toplist app over a published snapshot.

Used by the OpenAPI, schemathesis and browser tests: they talk to the API the way
integrators and browsers do, over a socket, not through Flask's test client.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from werkzeug.serving import make_server

from api.app import create_app
from ingest.board_events import Events, ItemEventGenerator, OrderGenerator, PlaybackGenerator
from ingest.catalog import load_catalog
from ingest.generator import Listen
from ingest.load import load_lines
from publish.publisher import publish
from publish.scheduler import start_scheduler, stop_scheduler
from toplist.boards import BOARDS
from toplist.config import Config
from toplist.engine import connect
from toplist.migrate import migrate
from toplist.snapshots import Snapshot

AS_OF = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
# Screenshots and reports the tests leave for people to look at (CI keeps the folder).
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
ARTIFACTS.mkdir(exist_ok=True)
TOKEN = "test-internal-token"

# Per (scope, window), the song that must top the board. In SE the last hour and the last day
# disagree, so switching the window must change the page.
TOP_SONGS = {
    ("global", "24h"): "se-day-anthem",
    ("SE", "24h"): "se-day-anthem",
    ("SE", "1h"): "se-hour-hit",
    ("DE", "24h"): "de-favourite",
}

# A song id with direction controls (right-to-left override, an unclosed isolate): the page
# must keep them from reordering anything outside the id.
BIDI_SONG = "x\u202eevil\u2067"


def board_listens() -> list[str]:
    """The listens of `board_listen_events`, as the lines loaded."""
    return [listen.to_json() for listen in board_listen_events()]


def board_listen_events() -> list[Listen]:
    """SE: a song with 40 listens 5 hours ago, one with 25 in the last hour; DE: its own."""
    plan = [
        ("SE", "se-day-anthem", 40, timedelta(hours=5)),
        ("SE", "se-hour-hit", 25, timedelta(minutes=20)),
        ("SE", "se-also-ran", 5, timedelta(minutes=30)),
        ("DE", "de-favourite", 30, timedelta(hours=2)),
        ("DE", "de-second", 12, timedelta(minutes=40)),
        ("NO", "no-song", 3, timedelta(hours=3)),
        ("NO", BIDI_SONG, 2, timedelta(hours=3)),
    ]
    return [
        Listen(f"{song_id}-{i}", song_id, f"u{i}", country, AS_OF - ago - timedelta(seconds=i))
        for country, song_id, count, ago in plan
        for i in range(count)
    ]


def other_boards() -> tuple[list[dict], dict[str, Events]]:
    """The catalog, and the events of each other board (the sale's top product is
    product-000, and its top buyer BUYER): the same every call."""
    items = ItemEventGenerator(seed=3)
    sale = OrderGenerator(seed=3).orders(300, AS_OF - timedelta(hours=1), AS_OF)
    sale.lines.append(BUYER_ORDER)
    sale.events.append(json.loads(BUYER_ORDER))
    return items.catalog(), {
        "listeners": PlaybackGenerator(seed=3, users=40).history(
            AS_OF - timedelta(minutes=5), AS_OF
        ),
        "sale": sale,
        "popular": items.events(600, AS_OF - timedelta(hours=2), AS_OF),
    }


def load_other_boards(client, config: Config) -> None:
    """Load and publish the other boards' events at AS_OF."""
    catalog, events = other_boards()
    load_catalog(client, config.database, [json.dumps(row) for row in catalog])
    for board, generated in events.items():
        load_lines(client, config.database, generated.lines, board=BOARDS[board])
        publish(client, config, board=board, as_of=AS_OF)


BUYER = "buyer-big-spender"
BUYER_ORDER = json.dumps(
    {"event_id": "big", "order_id": "big", "product_id": "product-000", "buyer_id": BUYER,
     "units": 1, "amount_cents": 10_000_000, "event_time": "2026-12-01T11:00:00Z"}
)  # fmt: skip


@dataclass
class LiveApi:
    url: str
    config: Config
    snapshot: Snapshot

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def republish(self) -> Snapshot:
        """Publish a new snapshot at the same as_of (the server notices within a poll)."""
        client = connect(self.config)
        try:
            self.snapshot = publish(client, self.config, AS_OF)
        finally:
            client.close()
        return self.snapshot


@contextmanager
def live_api(config: Config) -> Iterator[LiveApi]:
    """Load the boards above into `config.database`, publish, serve on 127.0.0.1."""
    config = replace(config, internal_token=TOKEN)
    client = connect(config)
    migrate(client, config)
    load_lines(client, config.database, board_listens())
    snapshot = publish(client, config, AS_OF)
    load_other_boards(client, config)
    app = create_app(config)
    # The publisher beside the API, as `toplist serve --publish-every` runs it: it answers
    # requests for a publication (corrections with "publish": true).
    publisher = start_scheduler(config, app.extensions["toplist"].on_publication, boards=())
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="live-api", daemon=True)
    thread.start()
    try:
        yield LiveApi(f"http://127.0.0.1:{server.server_port}", config, snapshot)
    finally:
        server.shutdown()
        thread.join(10)
        stop_scheduler(publisher)
        app.extensions["toplist"].close()
        client.command(f"DROP DATABASE IF EXISTS {config.database} SYNC")
        client.close()

"""The web page in a real headless Chromium: it shows the board, follows the pickers and
refreshes itself when a new snapshot is published."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from datetime import timedelta

import pytest
from live_api import ARTIFACTS, AS_OF, BIDI_SONG, TOP_SONGS, live_api
from playwright.sync_api import expect, sync_playwright

from ingest.generator import Listen
from ingest.load import load_lines
from publish.publisher import publish
from toplist.engine import connect

# Debian's chromium (the Makefile installs it); Playwright drives it, no browser download.
CHROMIUM = os.environ.get("TOPLIST_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def page():
    assert shutil.which(CHROMIUM), (
        f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium package"
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 900, "height": 700})
            yield page
        finally:
            browser.close()


def top_song(page) -> str:
    return page.locator("#board li").first.get_attribute("data-song") or ""


def test_the_page_shows_the_board_and_follows_scope_and_window(served, page):
    page.goto(served.url + "/")
    expect(page.locator("#board li").first).to_have_attribute(
        "data-song", TOP_SONGS[("global", "24h")]
    )
    expect(page.locator("#status")).to_contain_text("as of 2026-12-01T12:00:00Z")
    expect(page.locator("#status")).to_contain_text(served.snapshot.snapshot_id)

    # The scope picker lists what the snapshot holds; pick a country, then a window.
    expect(page.locator("#scope option")).to_have_count(4)  # global, DE, NO, SE
    for (scope, window), song in [
        (("DE", "24h"), TOP_SONGS[("DE", "24h")]),
        (("SE", "24h"), TOP_SONGS[("SE", "24h")]),
        (("SE", "1h"), TOP_SONGS[("SE", "1h")]),
    ]:
        page.select_option("#scope", scope)
        page.select_option("#window", window)
        expect(page.locator("#board li").first).to_have_attribute("data-song", song)
    rows = page.locator("#board li")
    expect(rows).to_have_count(2)  # SE in the last hour: se-hour-hit and se-also-ran
    expect(rows.first.locator(".listens")).to_have_text("25")
    bars = rows.locator(".bar")
    assert bars.first.get_attribute("style") == "width:100.0%"
    assert bars.nth(1).get_attribute("style") == "width:20.0%", "bars scale to the leader"
    expect(page.locator("h1")).to_have_text("Top songs")
    page.screenshot(path=str(ARTIFACTS / "web-page.png"), full_page=True)


def test_the_page_picks_up_a_new_snapshot_by_itself(served, page):
    page.goto(served.url + "/")
    expect(page.locator("#status")).to_contain_text(served.snapshot.snapshot_id)
    snapshot = served.republish()
    expect(page.locator("#status")).to_contain_text(snapshot.snapshot_id, timeout=15_000)


def test_the_page_warns_when_the_snapshot_is_stale(config, page):
    with live_api(replace(config, stale_after_seconds=0.001)) as stale:
        page.goto(stale.url + "/")
        expect(page.locator("#warning .stale")).to_contain_text("This snapshot is stale")
        expect(page.locator("#board li").first).to_have_attribute(
            "data-song", TOP_SONGS[("global", "24h")]
        )  # the last good board stays on show


def test_the_page_shows_the_other_boards(served, page):
    page.goto(served.url + "/")
    for board in ("listeners", "sale", "shelf"):
        expect(page.locator(f"#{board} li").first).to_have_attribute("data-item", re.compile(".+"))
    expect(page.locator("#sale li").first).to_have_attribute("data-item", "product-000")
    expect(page.locator("#listeners-meta")).to_contain_text("listening")
    page.screenshot(path=str(ARTIFACTS / "web-page-boards.png"), full_page=True)


def test_direction_controls_in_an_id_stay_inside_it(served, page):
    """A song id holding U+202E (right-to-left override) and an unclosed U+2067 is shown
    isolated: the other cells of its row and the rows after it keep their order."""
    page.goto(served.url + "/")
    page.select_option("#scope", "NO")
    row = page.locator(f'#board li[data-song="{BIDI_SONG}"]')
    expect(row).to_have_count(1)
    cell = row.locator(".song")
    expect(cell).to_have_text(BIDI_SONG)
    expect(page.locator("#shelf li .song").first).to_be_visible()  # every list is drawn
    isolation = page.evaluate(
        "Array.from(document.querySelectorAll('.song'), (e) => getComputedStyle(e).unicodeBidi)"
    )
    assert len(isolation) > 2 and set(isolation) <= {"isolate", "isolate-override", "plaintext"}
    assert cell.get_attribute("title") == f"\u2068{BIDI_SONG}\u2069"
    # What a reader sees: the rank, the id, the count, left to right as on every other row
    # (measured in one step in the page: a refresh may draw the list again between steps).
    xs = page.evaluate(
        """(song) => {
            const row = [...document.querySelectorAll('#board li')]
                .find((li) => li.dataset.song === song);
            return ['.rank', '.song', '.listens']
                .map((part) => row.querySelector(part).getBoundingClientRect().x);
        }""",
        BIDI_SONG,
    )
    assert xs[0] < xs[1] < xs[2]
    page.screenshot(path=str(ARTIFACTS / "web-page-direction-controls.png"), full_page=True)


def test_the_page_shows_how_songs_moved_and_plots_a_chosen_song(config, page):
    """A second publication ten minutes later, with a new song on top: it shows as NEW, the
    song it pushed down as ▼1; a click on a row plots its listens per hour over the window."""
    with live_api(config) as api:
        climber = [
            Listen(f"climb-{n}", "climber", "u", "SE", AS_OF + timedelta(seconds=n))
            for n in range(500)
        ]
        client = connect(api.config)
        try:
            load_lines(client, api.config.database, [x.to_json() for x in climber])
            publish(client, api.config, AS_OF + timedelta(minutes=10))
        finally:
            client.close()
        page.goto(api.url + "/")
        rows = page.locator("#board li")
        expect(rows.first).to_have_attribute("data-song", "climber")
        expect(rows.first.locator(".move")).to_have_text("NEW")
        expect(rows.nth(1)).to_have_attribute("data-song", TOP_SONGS[("global", "24h")])
        expect(rows.nth(1).locator(".move")).to_have_text("▼1")
        assert "peak #1" in (rows.nth(1).locator(".move").get_attribute("title") or "")

        rows.nth(1).click()
        expect(page.locator("#plot")).to_be_visible()
        expect(page.locator("#plot .meta")).to_contain_text(TOP_SONGS[("global", "24h")])
        expect(page.locator("#plot rect")).to_have_count(24)  # an hour a bar over 24h
        expect(page.locator("#plot .meta")).to_contain_text("Listens per hour")
        page.select_option("#window", "1h")  # the song has no listens in the last hour
        expect(page.locator("#plot")).to_be_hidden()
        page.select_option("#window", "24h")
        expect(rows.first.locator(".listens")).to_have_text("500")
        rows.first.click()
        expect(page.locator("#plot .meta")).to_contain_text("climber")
        expect(page.locator("#plot rect")).to_have_count(24)
        heights = page.locator("#plot rect").evaluate_all(
            "(rects) => rects.map((r) => Number(r.getAttribute('height')))"
        )
        assert heights[-1] == 40 and sum(h > 0 for h in heights) == 1, "all 500 in the last hour"
        page.screenshot(path=str(ARTIFACTS / "web-page-movement-and-plot.png"), full_page=True)

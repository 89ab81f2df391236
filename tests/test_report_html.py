"""report.html as an operator sees it: rendered by headless Chromium at laptop and desktop width, judged from the DOM.

The page is the report of a real audit of a copy of the 4.9.8 sample's crashed/ store (tests/data). A probe script
added to a copy of the page measures it in the browser: where the verdict and the recover command are, whether any
table cell is clipped, which finding kinds the page shows and which its legend explains. ``python -m
tests.test_report_html docs/report.png`` makes the README's screenshot from the same report.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from jobs.report.audit_report import render_html
from jobs.report.console import console_summary
from storelib.reports.report import AuditReport
from storelib.reports.verdict import verdict

DATA = Path(__file__).parent / "data"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
SCREENS = [(1024, 768), (1400, 1000)]  # laptop, desktop: the first screen
PROBE = """<script>
window.addEventListener("load", () => {
  // the first screen: the width is the window's; the height is the one asked for (#WxH), as in --screenshot,
  // since a headless window's innerHeight is less than its --window-size height
  const vw = window.innerWidth, vh = Number(location.hash.split("x")[1]);
  const first = (sel) => { const e = document.querySelector(sel); if (!e) return false;
    const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= vh && r.left >= 0 && r.right <= vw; };
  const kinds = (els) => [...new Set([...els].map((e) => e.dataset.kind))].sort();
  const out = {
    vw, vh,
    headline: first(".headline"),
    command: first("#recover-command"),
    command_text: (document.querySelector("#recover-command") || {}).textContent || null,
    clipped: [...document.querySelectorAll("td, th")].filter((c) => c.scrollWidth > c.clientWidth)
      .map((c) => c.textContent.slice(0, 80)),
    page_scrolls_sideways: document.documentElement.scrollWidth > vw,
    shown: kinds([...document.querySelectorAll("[data-kind]")].filter((e) => !e.closest("#legend"))),
    legend: kinds(document.querySelectorAll("#legend [data-kind]")),
  };
  const pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("Debian's chromium is not installed and `make setup` could not install it (apt-get chromium)")
    return path


def typed(report: dict[str, Any]) -> AuditReport:
    """A report.json as the page reads it, its verdict computed by this tree's storelib.reports.verdict (with the saved
    verdict's lost messages, if it has one)."""
    lost = ((report.get("verdict") or {}).get("truncate") or {}).get("messages")
    read = AuditReport.from_json(json.dumps({k: v for k, v in report.items() if k != "verdict"}))
    return dataclasses.replace(read, verdict=verdict(read, lost))


def crashed_json() -> dict[str, Any]:
    """The saved crashed/ audit."""
    return json.loads((DATA / "crashed-4.9.8-report.json").read_text())


def crashed_report() -> AuditReport:
    return typed(crashed_json())


def clean_report() -> AuditReport:
    """The same run as if the store were sound: no findings, every queue ok, nothing to repair."""
    report = crashed_json()
    report.update(findings=[], repairs=[], plan={"steps": [], "stopping": {}, "notes": []})
    report["summary"].update(exit_code=0, error=0, warning=0, info=0, findings=0, kinds={})
    for q in report["queues"]:
        q.update(status="ok", kinds=[], first_bad_queue_offset=None, bad_entries=0)
    report.pop("verdict")
    return typed(report)


def browse(html: str, width: int, height: int, *, screenshot: Path | None = None) -> dict[str, Any]:
    """Load ``html`` in a fresh headless Chromium at ``width`` x ``height``; the probe's measurements."""
    with tempfile.TemporaryDirectory(prefix="rmqstore-chromium-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        argv = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}"]
        out = subprocess.run(
            [*argv, "--dump-dom", f"{page.as_uri()}#{width}x{height}"],
            capture_output=True,
            text=True,
            timeout=90,
            check=True,
        ).stdout
        if screenshot is not None:
            page.write_text(html, encoding="utf-8")
            subprocess.run([*argv, f"--screenshot={screenshot}", page.as_uri()], capture_output=True, timeout=90)
    found = re.search(r'<pre id="probe">(.*?)</pre>', out, re.S)
    assert found, "the probe did not run: " + out[-500:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<"))


@pytest.mark.browser
@pytest.mark.parametrize(("width", "height"), SCREENS)
def test_verdict_and_command_on_the_first_screen_nothing_clipped(width: int, height: int, tmp_path: Path) -> None:
    report = crashed_report()
    seen = browse(render_html(report), width, height, screenshot=tmp_path / f"report-{width}.png")
    assert (seen["vw"], seen["vh"]) == (width, height)
    assert seen["headline"], "the verdict is not on the first screen"
    assert seen["command"], "the recover command is not on the first screen"
    assert seen["command_text"] == report.verdict["recover"]["commands"][0]
    assert seen["clipped"] == []
    assert not seen["page_scrolls_sideways"]
    assert seen["shown"], "no finding kind on the page"
    assert set(seen["shown"]) <= set(seen["legend"])
    assert set(seen["legend"]) == set(report.summary.kinds)


@pytest.mark.browser
def test_a_clean_store_says_so_on_the_first_screen() -> None:
    seen = browse(render_html(clean_report()), *SCREENS[0])
    assert seen["headline"] and seen["command"]
    assert seen["command_text"] == "Next: nothing for recover to change."
    assert (seen["shown"], seen["legend"], seen["clipped"]) == ([], [], [])


def test_the_page_names_no_deleted_directory_and_folds_the_ok_queues() -> None:
    report = crashed_report()
    page = render_html(report)
    assert report.run.rebuilt not in page and ".rmqstore-work-" not in page
    assert "rebuilt in a temporary work directory" in page
    assert "<summary>23 queues ok</summary>" in page
    assert page.index("Metrics/0") < page.index("<details>")  # the queues with findings come first
    assert "checkCRCOnRecover=true, mappedFileSizeCommitLog=131072 (128.0 KiB)" in page
    assert '<time datetime="2026-11-22T01:59:20.863000+00:00" title="1795312760863 ms since the epoch">' in page
    assert "1 info;" in console_summary(report, None) and "6 errors" in console_summary(report, None)


def test_the_console_starts_with_the_verdict_and_the_command() -> None:
    lines = console_summary(crashed_report(), "/reports/x").splitlines()
    assert lines[0].startswith("VERDICT: Starting the broker now truncates the commitlog at offset 1,965,519")
    salvage, next_ = (next(i for i, x in enumerate(lines) if x.startswith(w)) for w in ("SALVAGE", "NEXT (stop"))
    assert salvage < next_ and "loses no sound message" in lines[salvage]  # its 2 crc-mismatch records: tombstones
    assert "  (starting the broker as it is loses 5,131 sound messages)" in lines
    assert lines[next_ + 1].strip() == (
        "rmqstore recover --store /tmp/report-crashed "
        "--broker-config /work/shared/fixtures/rocketmq-4.9.8-sample/broker.conf"
    )


def test_a_clean_report_has_no_empty_tables() -> None:
    page = render_html(clean_report())
    assert "<p>No findings.</p>" in page and "The broker would start normally." in page
    assert "<table><tr><th>finding" not in page


def test_store_values_are_escaped() -> None:
    report = crashed_json()
    report["run"]["store"] = "/data/<script>alert(1)</script>"
    report["queues"][0]["topic"] = "<img src=x>"
    page = render_html(typed(report))
    assert "<script>alert" not in page and "<img src=x>" not in page


if __name__ == "__main__":  # the README's screenshot: python -m tests.test_report_html docs/report.png
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/report.png").resolve()
    print(browse(render_html(crashed_report()), *SCREENS[1], screenshot=target))

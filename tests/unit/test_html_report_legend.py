"""Chart text gets the room it needs: legend entries do not run into the next (seen in the
migration bench's "records/s" chart), and horizontal bars start after their longest label
(seen in make bench's ratio chart), and values below one are not shown as 0."""

from __future__ import annotations

import re

from pulsar_gateway.tools import html_report

NAMES = ["migrate (pulsar format)", "gateway produce (pulsar format)", "migrate (kafka format)"]


def test_legend_entries_do_not_overlap_and_fit_the_chart() -> None:
    svg = html_report.grouped_bar_chart("records/s", ["1M", "10M"], {n: [1, 2] for n in NAMES}, "")
    width = int(re.search(r'<svg width="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    entries = [
        (int(x), name)
        for x, name in re.findall(r'<text x="(\d+)" y="\d+" font-size="11">([^<]+)</text>', svg)
        if name in NAMES
    ]
    assert [name for _, name in entries] == NAMES
    for (x, name), (next_x, _) in zip(entries, entries[1:], strict=False):
        assert next_x - x >= 6 * len(name), (name, x, next_x)  # 11 px text: ~6 px a character
    last_x, last = entries[-1]
    assert last_x + 6 * len(last) <= width


def test_bars_start_after_their_longest_label() -> None:
    label = "gateway kafka format/tansu produce p99 latency"
    svg = html_report.bar_chart("ratios", [("short", 1.0), (label, 2.0)], "%")
    bar_x = {int(x) for x in re.findall(r'<rect x="(\d+)"', svg)}
    assert len(bar_x) == 1
    assert bar_x.pop() >= 4 + 6 * len(label)


def test_a_bar_below_one_shows_its_value_not_zero() -> None:
    """CPU per record is a fraction of a microsecond: make bench's chart labelled 0.25 us
    as "0 us"."""
    svg = html_report.bar_chart("CPU", [("gateway", 0.25), ("tansu", 1422480.0)], "us")
    labels = re.findall(r'font-size="12">([^<]+ us)</text>', svg)
    assert labels == ["0.25 us", "1,422,480 us"]

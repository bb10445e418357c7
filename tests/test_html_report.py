"""`shardsmith report`: one self-contained HTML page a person reads in the morning, on a phone
or a desktop, that nothing in a dataset can script."""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main
from shardsmith.dataset.changes import VersionTotals
from shardsmith.dataset.manifest import read_manifest
from shardsmith.insight.diff import VersionDiff
from shardsmith.insight.htmlreport import ReportOptions, render_report
from shardsmith.insight.named_source import named_originals

import defects
import images

HOSTILE_CLASS = '"><img src=x onerror=alert(1)>'
HOSTILE_PATH = "odd/<script>alert(1)</script>.jpg"  # a folder named `<script>alert(1)<`
HOSTILE_STRINGS = ("<script>alert(1)</script>", HOSTILE_CLASS, "</svg>")
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def pack(source: Path, output: Path, *more: str) -> None:
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--size", "64",
                                       "--split", "train=0.6,val=0.4", "--workers", "1",
                                       "--quiet", "--max-reject-fraction", "1", *more])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Two versions of three classes (one named like markup), with rejects: a truncated JPEG,
    an empty file under a path that reads as a script tag, and a text file."""
    root = tmp_path_factory.mktemp("report")
    source, output = root / "source", root / "out"
    for number in range(6):
        images.write(source / "ok" / f"a{number}.jpg", images.jpeg(96, 64, number))
        images.write(source / HOSTILE_CLASS / f"b{number}.png", images.png(64, 96, 10 + number))
    images.write(source / "dent" / "c.jpg", images.jpeg(80, 80, 20))
    pack(source, output)
    images.write(source / "dent" / "new.jpg", images.jpeg(80, 80, 21))
    images.write(source / "dent" / "cut.jpg", images.truncated_jpeg())
    images.write(source / HOSTILE_PATH, b"")
    images.write(source / "ok" / "notes.jpg", b"not an image at all")
    pack(source, output)
    return output


@pytest.fixture(scope="module")
def page(dataset) -> str:
    return render_report(dataset, read_manifest(dataset), diff="no changes file kept").html


def named(dataset: Path) -> ReportOptions:
    """The report's options with the folder the dataset was packed from named as its source."""
    return ReportOptions(originals=named_originals(str(dataset.parent / "source")))


def contract_diff(added_key: str) -> VersionDiff:
    """A diff as ``diff_versions`` gives it."""
    return VersionDiff(
        old=1, new=2,
        before=VersionTotals(classes=("dent", "ok"), object_classes=(),
                             counts={"train": {"ok": 4, "dent": 1}, "val": {"ok": 2}},
                             objects={"</svg>": 0}),
        after=VersionTotals(classes=("dent", "ok", "<script>alert(1)</script>"),
                            object_classes=("</svg>",),
                            counts={"train": {"ok": 4, "dent": 2}, "val": {"ok": 2}},
                            objects={"</svg>": 7}),
        counts={"added": 1, "removed": 2, "changed": 3, "relabelled": 4, "reannotated": 0},
        rejects_new=[{"path": HOSTILE_PATH, "reason": "empty", "detail": "zero-byte"}],
        rejects_new_count=1, rejects_fixed=["ok/fixed.jpg"], rejects_fixed_count=1,
        added=[{"path": "dent/new.jpg", "key": added_key, "split": "train", "class": "dent"}],
        removed=[{"path": "gone/x.jpg", "key": "gone_x", "split": "val", "class": "gone"}],
        relabelled=[{"path": "ok/a1.jpg", "key": "k", "from": "ok", "to": HOSTILE_CLASS}])


def key_of(dataset: Path, path: str) -> str:
    (record,) = [r for r in images.samples_of(dataset) if r["path"] == path]
    return record["key"]


def test_the_page_references_nothing_outside_itself(page):
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower()
    assert all(uri.startswith("data:image/jpeg;base64,")
               for uri in re.findall(r'src="([^"]*)"', page))


def test_every_string_of_the_dataset_is_escaped_in_text_and_attributes(dataset):
    html = render_report(dataset, read_manifest(dataset),
                         diff=contract_diff(key_of(dataset, "dent/new.jpg"))).html
    for hostile in HOSTILE_STRINGS[:2]:
        assert hostile not in html
    assert "&lt;/svg&gt;" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert html.count("<svg") == html.count("</svg>") == 1  # the balance chart alone


def test_the_version_history_lists_every_version_newest_first(page):
    history = page[page.index('id="history"'):page.index('id="diff"')]
    versions = re.findall(r'<tr><td class="num">(\d+)</td>', history)
    assert versions == ["2", "1"]


def test_the_diff_section_shows_the_contracts_numbers_and_lists(dataset):
    html = render_report(dataset, read_manifest(dataset),
                         diff=contract_diff(key_of(dataset, "dent/new.jpg"))).html
    diff = html[html.index('id="diff"'):html.index('id="balance"')]
    for number, name in ((1, "added"), (2, "removed"), (3, "changed"), (4, "relabelled")):
        assert f"<b>{number}</b>{name}</div>" in diff
    assert '2 <span class="up">(+1)</span>' in diff  # dent in train: 1 -> 2
    assert '7 <span class="up">(+7)</span>' in diff  # objects of the new object class
    assert "1 classes unchanged" in diff  # ok
    assert "gone/x.jpg" in diff and "ok/fixed.jpg" in diff


def test_without_a_diff_the_section_says_why(page):
    assert "No diff: no changes file kept" in page


def test_the_diff_of_the_last_two_versions_is_read_from_the_dataset(dataset):
    pytest.importorskip("shardsmith.insight.diff", reason="needs shardsmith diff (issue 20)")
    report = render_report(dataset, read_manifest(dataset))
    diff = report.html[report.html.index('id="diff"'):report.html.index('id="balance"')]
    assert report.diff_note == "" and "Version 1 to 2" in diff
    assert "<b>1</b>added</div>" in diff and "<b>3</b>rejects new</div>" in diff
    assert report.samples_shown == 1 and "dent/new.jpg" in report.html


def test_the_diffs_added_samples_make_the_contact_sheet(dataset):
    key = key_of(dataset, "dent/new.jpg")
    report = render_report(dataset, read_manifest(dataset), diff=contract_diff(key))
    samples = report.html[report.html.index('id="samples"'):report.html.index('id="timings"')]
    assert report.samples_shown == 1 and "dent/new.jpg" in samples
    assert "New samples (1 shown)" in samples


def test_without_a_diff_the_newest_samples_are_shown(page):
    samples = page[page.index('id="samples"'):page.index('id="timings"')]
    assert "Newest samples" in samples and samples.count("<figure>") == 14


def test_rejects_get_a_placeholder_when_their_original_does_not_decode(dataset):
    page = render_report(dataset, read_manifest(dataset), named(dataset),
                         diff="no changes file kept").html
    rejects = page[page.index('id="rejects"'):page.index('id="samples"')]
    assert rejects.count("<figure>") == 3 and 'class="placeholder"' in rejects
    assert "does not decode (corrupt)" in rejects  # the truncated JPEG
    assert "an empty file" in rejects and "does not decode (not_an_image)" in rejects


def test_a_reject_whose_original_decodes_now_is_shown_from_the_source(dataset, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(dataset, copy)
    manifest = read_manifest(copy)
    source = Path(manifest.source)
    cut = source / "dent" / "cut.jpg"
    saved = cut.read_bytes()
    try:
        cut.write_bytes(images.jpeg(300, 200, 5))  # fixed on the NAS, not packed yet
        report = render_report(copy, manifest, named(dataset), diff="none")
    finally:
        cut.write_bytes(saved)
    assert report.reject_pictures == 1
    (uri,) = re.findall(r'data:image/jpeg;base64,([^"]+)"',
                        report.html[report.html.index('id="rejects"'):
                                    report.html.index('id="samples"')])
    picture = Image.open(io.BytesIO(base64.b64decode(uri)))
    assert max(picture.size) == 160 and np.asarray(picture).std() > 4


def test_a_missing_original_or_an_unmounted_source_is_a_placeholder(dataset, tmp_path):
    manifest = read_manifest(dataset)
    report = render_report(dataset, manifest, ReportOptions(
        originals=named_originals(str(tmp_path / "gone"))), diff="none")
    assert report.reject_pictures == 0 and report.rejects_shown == 3
    assert any("not reachable" in note for note in report.notes)
    assert report.html.count("original not read") == 3


def test_the_rejects_shown_are_capped_with_a_count_of_the_rest(dataset):
    report = render_report(dataset, read_manifest(dataset), ReportOptions(rejects_shown=1),
                           diff="none")
    assert report.rejects_shown == 1
    assert "and 2 more rejects not shown" in report.html


def test_the_same_dataset_gives_the_same_page(dataset, page):
    assert render_report(dataset, read_manifest(dataset), diff="no changes file kept").html \
        == page


def test_new_samples_of_an_annotated_dataset_have_their_boxes_drawn(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    relpaths = ["lot/a.jpg", "lot/b.jpg"]
    for number, relpath in enumerate(relpaths):
        images.write(source / relpath, defects.original(seed=number))
    overrides = defects.write_annotations(source, relpaths, "voc")
    defects.pack_with(source, output, overrides, **{"image.size": 240})
    plain = ReportOptions(samples_shown=2)
    report = render_report(output, read_manifest(output), plain, diff="none")
    uris = re.findall(r'data:image/jpeg;base64,([^"]+)"', report.html)
    picture = np.asarray(Image.open(io.BytesIO(base64.b64decode(uris[0]))).convert("RGB"),
                         np.int16)
    red, green, blue = picture[..., 0], picture[..., 1], picture[..., 2]
    # a saturated box colour, on a grey picture
    assert int(((abs(red - green) > 80) | (abs(green - blue) > 80)).sum()) > 100
    assert report.samples_shown == 2


def cli(*args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, ["report", *args])
    assert result.exit_code == expect, result.output
    return result.output


def test_the_command_writes_the_page_and_says_what_it_holds(dataset, tmp_path):
    output = cli(str(dataset), "-o", str(tmp_path / "r.html"))
    assert "3 rejects (0 pictured)" in output
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_the_command_refuses_to_write_into_the_dataset(dataset):
    output = cli(str(dataset), "-o", str(dataset / "report.html"), expect=2)
    assert "inside the dataset" in output and not (dataset / "report.html").exists()


def test_a_directory_without_a_manifest_is_one_line_and_exit_2(tmp_path):
    output = cli(str(tmp_path), "-o", str(tmp_path.parent / "r.html"), expect=2)
    assert output.count("\n") == 1 and "no manifest.json" in output


def one_line(output: str) -> str:
    assert output.count("\n") == 1 and output.startswith("shardsmith: error:"), output
    return output


@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
@pytest.mark.parametrize("command", ["report", "sheet", "pack --report"])
def test_an_output_that_is_not_a_regular_file_is_refused_and_left_untouched(
        dataset, tmp_path, kind, command):
    target, aimed = tmp_path / "out.html", tmp_path / "victim.txt"
    aimed.write_text("keep me")
    if kind == "link":
        target.symlink_to(aimed)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    if command == "report":
        args = ["report", str(dataset), "-o", str(target)]
    elif command == "sheet":
        args = ["sheet", str(dataset), "-o", str(target)]
    else:
        args = ["pack", str(tmp_path / "nothing"), str(tmp_path / "packed"), "--report",
                str(target)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    said = one_line(result.output)
    assert str(target) in said and ("where the output file belongs" in said
                                    or kind == "folder" and "is a directory" in said)
    assert {"link": target.is_symlink, "fifo": lambda: stat.S_ISFIFO(os.lstat(target).st_mode),
            "folder": target.is_dir}[kind]()
    assert aimed.read_text() == "keep me" and not (tmp_path / "packed").exists()


def test_an_empty_output_name_and_a_missing_folder_are_one_line_and_exit_2(dataset, tmp_path):
    assert "output file name is empty" in one_line(cli(str(dataset), "-o", "", expect=2))
    missing = tmp_path / "no" / "such"
    said = one_line(cli(str(dataset), "-o", str(missing / "r.html"), expect=2))
    assert f"{missing}: no such folder" in said and ".tmp" not in said


def test_a_damaged_changes_file_is_a_note_on_the_page_not_a_failure(dataset, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    changes = sorted(copy.glob("changes-v*.jsonl"))[-1]
    changes.write_bytes(changes.read_bytes()[:-5])
    output = cli(str(copy), "-o", str(tmp_path / "r.html"))
    assert "no diff:" in output and (tmp_path / "r.html").exists()


# -- in a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium from Debian's packages (CI installs it; as root it needs
    --no-sandbox), with nothing that reaches the network."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (test extras)")
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (.ci/run installs them)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--no-first-run", "--disable-quic",
                     "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def opened(dataset, browser, tmp_path_factory):
    """The page of the hostile dataset, with the contract's hostile diff, as a file."""
    html = render_report(dataset, read_manifest(dataset),
                         diff=contract_diff(key_of(dataset, "dent/new.jpg"))).html
    path = tmp_path_factory.mktemp("page") / "report.html"
    path.write_text(html)
    browser.set_window_size(1280, 900)
    browser.get(path.as_uri())
    return browser


@pytest.mark.slow
def test_in_the_browser_no_script_ran_and_no_element_was_injected(opened):
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        opened.switch_to.alert.text  # noqa: B018 - an alert(1) that ran would be open
    assert opened.execute_script("return document.scripts.length") == 0
    assert opened.execute_script(
        "return [...document.images].filter(i => !i.src.startsWith('data:')).length") == 0
    assert opened.execute_script("return document.querySelectorAll('svg').length") == 1
    text = opened.find_element("tag name", "body").text
    assert "<script>alert(1)</script>" in text and HOSTILE_CLASS in text


def test_in_the_browser_the_key_numbers_are_on_the_page(opened, dataset):
    text = opened.find_element("tag name", "body").text
    manifest = read_manifest(dataset)
    assert f"{manifest.totals.packed}\nsamples" in text
    assert "3\nrejects" in text and "2\nversion" in text
    assert "4\nrelabelled" in text


def test_in_the_browser_the_page_is_not_blank(opened):
    shot = Image.open(io.BytesIO(opened.get_screenshot_as_png())).convert("L")
    assert float(np.asarray(shot, np.float32).std()) > 10


def test_on_a_phone_the_page_never_scrolls_sideways(opened):
    opened.set_window_size(390, 844)
    width = opened.execute_script("return window.innerWidth")
    if width > 390:  # headless windows have a minimum width; emulate the phone's viewport
        opened.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    assert opened.execute_script("return window.innerWidth") == 390
    assert opened.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth")

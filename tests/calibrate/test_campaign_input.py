"""Bad campaign files are refused with an error naming the file, the line and the column."""

import gzip

import pytest

from simfuse.calibrate.campaign import CAMPAIGN_COLUMNS, read_campaign
from simfuse.errors import SpecError

HEADER = ",".join(CAMPAIGN_COLUMNS)
GOOD = "embedding_all_to_all,compute,fp32,8,8,128,704,5.4e-06"


@pytest.mark.parametrize("body, field, words", [
    ("kernel,variant\nx,y\n", "dtype", "missing campaign column"),
    (HEADER + "\n", "", "no campaign rows"),
    ("", "", "no campaign rows"),
    (HEADER + "\n" + GOOD.replace("5.4e-06", "nan") + "\n", "line 2: median_s", "finite number > 0"),
    (HEADER + "\n" + GOOD.replace("5.4e-06", "0") + "\n", "line 2: median_s", "finite number > 0"),
    (HEADER + "\n" + GOOD + "\n" + GOOD.replace(",8,8,", ",-8,8,") + "\n", "line 3: grid", ">= 0"),
    (HEADER + "\n" + GOOD.replace(",704,", ",inf,") + "\n", "line 2: bytes_per_wg", "finite"),
    (HEADER + "\n" + GOOD.replace(",704,", ",../x,") + "\n", "line 2: bytes_per_wg", "expected a number"),
    (HEADER + "\n" + GOOD.replace(",128,", ",,") + "\n", "line 2: flops_per_wg", "empty"),
])
def test_bad_campaign_rows_name_file_line_and_column(tmp_path, body, field, words):
    p = tmp_path / "c.csv"
    p.write_text(body)
    with pytest.raises(SpecError) as ei:
        read_campaign(p)
    assert ei.value.source == str(p) and ei.value.field == field and words in ei.value.message


def test_corrupt_gzip_and_binary_are_refused(tmp_path):
    bad = tmp_path / "c.csv.gz"
    bad.write_bytes(b"\x1f\x8b" + b"garbage")
    with pytest.raises(SpecError, match="corrupt or truncated gzip"):
        read_campaign(bad)
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 8)
    with pytest.raises(SpecError, match="not a readable campaign file"):
        read_campaign(binary)


def test_good_rows_read_plain_and_gzipped(tmp_path):
    text = HEADER + "\n" + GOOD + "\n"
    plain, gz = tmp_path / "c.csv", tmp_path / "c.csv.gz"
    plain.write_text(text)
    gz.write_bytes(gzip.compress(text.encode()))
    assert read_campaign(plain) == read_campaign(gz)
    assert read_campaign(plain)[0]["kernel"] == "embedding_all_to_all"


def test_cli_refuses_a_bad_heldout_campaign_before_fitting_and_writes_nothing(tmp_path, capsys):
    from simfuse.cli import main

    good = tmp_path / "train.csv"
    good.write_text(HEADER + "\n" + GOOD + "\n")
    held = tmp_path / "held.csv"
    held.write_text("kernel,variant\nx,y\n")
    out = tmp_path / "out"
    rc = main(["validate", "--campaign", str(good), "--heldout-campaign", str(held), "--out", str(out)])
    assert rc == 2 and not out.exists()
    assert "held.csv: dtype: missing campaign column" in capsys.readouterr().err


def test_cli_takes_several_campaigns_after_one_flag(tmp_path, capsys):
    """``--campaign A B`` (as the README writes it) reads both files, like ``--campaign A --campaign B``: the
    second, bad one is refused by name."""
    from simfuse.cli import main

    good = tmp_path / "train.csv"
    good.write_text(HEADER + "\n" + GOOD + "\n")
    bad = tmp_path / "second.csv"
    bad.write_text("kernel,variant\nx,y\n")
    for argv in (["--campaign", str(good), str(bad)], ["--campaign", str(good), "--campaign", str(bad)]):
        rc = main(["validate", *argv, "--out", str(tmp_path / "out")])
        assert rc == 2 and not (tmp_path / "out").exists()
        assert "second.csv: dtype: missing campaign column" in capsys.readouterr().err

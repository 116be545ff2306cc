"""The README is the project's front page (issue 50): it fits on a screen, reads without side-scrolling,
and every link in it leads somewhere in the checkout."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_readme_fits_on_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the front page keeps to 150"
    wide = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > 120 and not line.startswith("|")]
    assert not wide, f"README.md lines over 120 characters outside tables (line, length): {wide}"


def test_every_relative_link_in_the_readme_exists():
    text = README.read_text(encoding="utf-8")
    targets = {m.split("#", 1)[0] for m in re.findall(r"\]\(([^)\s]+)\)", text)}
    local = sorted(t for t in targets if t and not re.match(r"[a-z]+:", t))
    assert local, "the README links no file of the checkout"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links files that do not exist: {missing}"

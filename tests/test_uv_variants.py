"""benchmarks/uv_variants.py: every variant's edit still applies to tinyloop/uv's sources as they are.

A patch that no longer applies fails the variant's build at benchmark
time, minutes into a run; here it fails in a second, without building.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks import uv_variants

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) is not installed")
@pytest.mark.parametrize("variant", sorted(uv_variants.VARIANTS))
def test_every_variant_applies_to_the_sources_as_they_are(variant: str, tmp_path: Path) -> None:
    package = tmp_path / "tinyloop" / "uv"
    package.mkdir(parents=True)
    for source in (ROOT / "tinyloop" / "uv").glob("*.p*"):
        if source.suffix in (".pyx", ".pxd"):
            shutil.copy(source, package / source.name)
    before = {path.name: path.read_text() for path in package.iterdir()}
    uv_variants.VARIANTS[variant](package)   # raises RuntimeError when a patch does not apply exactly
    after = {path.name: path.read_text() for path in package.iterdir()}
    assert set(after) == set(before), "an edit adds or leaves no file (.rej, .orig)"
    assert (after == before) == (variant == "shipped"), "every variant but 'shipped' changes the sources"

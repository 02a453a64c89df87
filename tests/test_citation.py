"""The licence and the citation: ``LICENSE`` is the Apache License 2.0, word for word, as pyproject.toml says;
``CITATION.cff`` is valid Citation File Format 1.2.0 (checked against its JSON schema,
``tests/data/cff-schema-1.2.0.json``, copied from the Citation File Format project, CC-BY-4.0) and names the
papers it builds on; the README gives the BibTeX."""

from __future__ import annotations

import hashlib
import json
import re

import jsonschema
import yaml
from conftest import REPO

# md5 of https://www.apache.org/licenses/LICENSE-2.0.txt, as apache.org serves it
APACHE_2_MD5 = "3b83ef96387f14655fc854ddc3c6bd57"
PAPERS = ("arXiv:2310.11667", "arXiv:2403.08715")  # SOTOPIA (ICLR 2024), SOTOPIA-π (ACL 2024)


def test_license_is_the_apache_2_text() -> None:
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.md5(text).hexdigest() == APACHE_2_MD5, "LICENSE is not the standard Apache License 2.0 text"
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'license = "Apache-2.0"' in pyproject and 'license-files = ["LICENSE"]' in pyproject


def test_citation_cff_is_valid() -> None:
    schema = json.loads((REPO / "tests" / "data" / "cff-schema-1.2.0.json").read_text())
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    jsonschema.Draft7Validator(schema).validate(citation)
    version = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert citation["version"] == version and citation["license"] == "Apache-2.0"
    cited = {i["value"] for ref in citation["references"] for i in ref.get("identifiers", [])}
    assert set(PAPERS) <= cited, cited


def test_readme_gives_bibtex_and_the_papers() -> None:
    readme = (REPO / "README.md").read_text()
    assert "@software{" in readme and "CITATION.cff" in readme
    assert all(paper.removeprefix("arXiv:") in readme for paper in PAPERS)

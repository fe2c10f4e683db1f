"""Sphinx settings for the documentation site: Markdown pages through MyST (as Tango's own docs
are built), and the API page from the docstrings (autodoc). Built by ``tests/test_docs.py`` with
warnings as errors: ``sphinx-build -W -b html docs docs/_build/html``."""

project = "catwalk-steps"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
# Anchors for headings down to ###, so pages can link to each other's sections (page.md#section).
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "alabaster"
html_title = "catwalk-steps"

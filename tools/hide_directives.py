"""Sphinx extension for the book: the reader sees no export machinery.

The chapters carry nbdev's directives: a first cell `#| default_exp MODULE` and `#| export`
lines at the top of the cells that go to the package. Before myst-nb reads a chapter, this
removes every `#| ` line from its code cells and drops the cells left empty, so the HTML shows
the code a reader needs and nothing else. The notebooks themselves are not changed."""
import json, re

DIRECTIVE = re.compile(r"^#\|[^\n]*(\n|$)", re.M)


def strip_directives(notebook: dict) -> dict:
    "The notebook without `#| ` lines and without the code cells that held nothing else."
    cells = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            if DIRECTIVE.search(src):
                src = DIRECTIVE.sub("", src)
                if not src.strip():
                    continue
                cell = {**cell, "source": src.lstrip("\n")}
        cells.append(cell)
    return {**notebook, "cells": cells}


def _on_source_read(app, docname, source):
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    source[0] = json.dumps(strip_directives(json.loads(source[0])), ensure_ascii=False)


def setup(app):
    app.connect("source-read", _on_source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

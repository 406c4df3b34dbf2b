"""Sphinx extension for the book: every page works with networking off and logs no error.

The browser tests (tests/test_explorers_browser.py) fail on any request that leaves a page and on
any console error. Three things of the toolchain, not of the chapters, would trip them:

* matplotlib's animations (`to_jshtml`) link Font Awesome 4 from a CDN for their buttons. The
  theme ships Font Awesome 6, whose `fa` classes draw the same buttons, so the link is removed.
* jupyter-book 1.x registers sphinx-thebe's settings script twice; the second copy throws
  ("Identifier 'THEBE_JS_URL' has already been declared"). A page keeps one copy of each script.
* pydata-sphinx-theme logs "Got invalid theme mode" when no default colour mode is set: the book
  sets "auto" (follow the reader's system), the mode the theme falls back to anyway.

The notebooks are not changed: in JupyterLab an animation still links its stylesheet."""
import re
from docutils import nodes

CDN_STYLESHEET = re.compile(r'<link rel="stylesheet"\s+href="https?://maxcdn\.bootstrapcdn\.com/font-awesome/[^"]*">\s*')


def _drop_cdn_links(app, doctree, docname):
    for node in list(doctree.findall(nodes.raw)):
        text = node.astext()
        if "maxcdn.bootstrapcdn.com" in text:
            kept = CDN_STYLESHEET.sub("", text)
            node.replace_self(nodes.raw(kept, kept, format=node.get("format", "html")))


def _one_of_each_script(app, pagename, templatename, context, doctree):
    scripts, seen = context.get("script_files"), set()
    if scripts is not None:
        unique = []
        for js in scripts:
            # the copies differ only in a filename None against "" (a body, no file)
            key = (getattr(js, "filename", str(js)) or "", getattr(js, "priority", None),
                   tuple(sorted(getattr(js, "attributes", {}).items())))
            if key not in seen:
                seen.add(key)
                unique.append(js)
        scripts[:] = unique
    if not context.get("default_mode"):
        context["default_mode"] = "auto"


def setup(app):
    app.connect("doctree-resolved", _drop_cdn_links)
    app.connect("html-page-context", _one_of_each_script, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

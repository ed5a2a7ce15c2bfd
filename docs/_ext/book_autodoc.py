# docs/_ext/book_autodoc.py
#
# Small repairs that let the API reference build under -n -W while the
# source stays written for its reader, not for Sphinx:
#
#   * A name is first looked up the way Python would, from the docstring's
#     module and class: a re-export (tinyloop.aio.Loop) or an inherited method
#     links to where it is defined; a private helper, a TypeVar or a
#     standard-library object (no intersphinx offline) is set as plain text.
#     A name Python cannot find at all still warns: that is a typo or a rename.
#
#   * A docstring says :class:`Request` where the module imported Request from
#     a sibling (tinyloop.http.connection uses tinyloop.http.parser.Request).
#     Sphinx looks only in the current module and class; when that fails we
#     search once more by the name's last part, and link if exactly one
#     documented object matches, or if exactly one of several lies nearest
#     the docstring's own module (generators' Task from traps.py).  A tie
#     still warns ("more than one target"): a name is never linked by guess.
#   * A dataclass field with ``default_factory`` shows ``=<factory>`` in its
#     signature, which Sphinx cannot parse; it is shown as ``=...``.
#   * Part IV's extension (tinyloop.uv._loop) is optional: on a machine
#     without libuv, or in a fresh clone not yet built, it cannot be
#     imported.  The book still builds there: the extension is mocked
#     (autodoc_mock_imports), so tinyloop.uv's Python modules are documented
#     from their source, and each of their pages says that the extension
#     was not built and what the C base class adds.  TINYLOOP_BOOK_NO_UV=1
#     builds that way on purpose (tests/test_docs.py).
#   * A module's docstring is written for help() and the reader of the file:
#     plain text, with indented tables and lists.  Where it is not also valid
#     reStructuredText, its first paragraph stays prose (autosummary's summary
#     line) and the rest is shown as written, in a literal block.

from __future__ import annotations

import importlib
import inspect
import os

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.ext.autodoc.mock import ismock
from sphinx.util.nodes import make_refnode

__all__ = ["setup"]


def _find_by_python(module: str, cls: str | None, target: str) -> tuple[bool, object]:
    """What Python itself finds for ``target`` seen from ``module`` (and class ``cls``):
    ``(True, object)``, or ``(False, None)`` when nothing by that name exists."""
    tries = []
    if cls:
        tries.append(f"{module}.{cls}.{target}")
    tries += [f"{module}.{target}", target]
    for dotted in tries:
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):  # the longest importable module first
            try:
                obj: object = importlib.import_module(".".join(parts[:cut]))
            except Exception:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                break
            return True, obj
    return False, None


def _resolve_by_python(app: Sphinx, env: BuildEnvironment, node: pending_xref,
                       contnode: nodes.TextElement) -> nodes.Node | None:
    """A name Python finds: a link to where it is defined if that is documented (a
    re-export, an inherited method), plain text if it is not tinyloop's public API
    (a private helper, a TypeVar, the standard library); None otherwise."""
    found, obj = _find_by_python(node.get("py:module") or "", node.get("py:class"),
                                 node["reftarget"])
    if not found:
        return None
    if ismock(obj):
        return contnode  # part of the extension this build could not import
    obj = inspect.unwrap(obj) if callable(obj) else obj
    home, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(home, str) and isinstance(qualname, str):
        name = f"{home}.{qualname}"
        entry = env.get_domain("py").objects.get(name)
        if entry is not None:
            return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id,
                                contnode, name)
        public = home.split(".")[0] == "tinyloop" and not any(
            part.startswith("_") for part in name.split("."))
        if public:
            return None  # tinyloop's own and public, yet undocumented: let Sphinx warn
    return contnode


def _resolve_by_last_name(app: Sphinx, env: BuildEnvironment, node: pending_xref,
                          contnode: nodes.TextElement) -> nodes.Node | None:
    if node.get("refdomain") != "py" or node.get("refspecific"):
        return None
    by_python = _resolve_by_python(app, env, node, contnode)
    if by_python is not None:
        return by_python
    domain = env.get_domain("py")
    module = node.get("py:module") or ""
    target = node["reftarget"]
    # Sphinx's own "fuzzy" search: any module, unique suffix.
    types = domain.objtypes_for_role(node["reftype"]) or []
    matches = domain.find_obj(env, module, node.get("py:class"), target,
                              types[0] if len(types) == 1 else None, 1)
    if len(matches) > 1:
        # Several modules define the name (generators' Task and coroutines'
        # Task): the one nearest the docstring's own module is meant, when
        # exactly one is nearest.
        def shared(name: str) -> int:
            count = 0
            for a, b in zip(name.split("."), module.split(".")):
                if a != b:
                    break
                count += 1
            return count
        best = max(shared(name) for name, _ in matches)
        nearest = [m for m in matches if shared(m[0]) == best]
        if len(nearest) == 1 and best > 1:
            matches = nearest
    if len(matches) != 1:
        retry = node.deepcopy()
        retry["refspecific"] = True  # let Sphinx warn about it in its own words
        return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                                   target, retry, contnode)
    name, obj = matches[0]
    return make_refnode(app.builder, node["refdoc"], obj.docname, obj.node_id, contnode, name)


def _parsable_signature(app: Sphinx, what: str, name: str, obj: object, options: object,
                        signature: str | None, return_annotation: str | None
                        ) -> tuple[str | None, str | None] | None:
    if signature and "<factory>" in signature:
        return signature.replace("<factory>", "..."), return_annotation
    return None


EXTENSION = "tinyloop.uv._loop"
NO_UV = "TINYLOOP_BOOK_NO_UV"  # set to 1: build as if the extension were not built


def extension_missing() -> str | None:
    """Why tinyloop.uv's extension cannot be imported here, or None when it can."""
    if os.environ.get(NO_UV, "") not in ("", "0"):
        return f"{NO_UV} is set"
    try:
        importlib.import_module(EXTENSION)
    except ImportError as error:
        return str(error)
    return None


def _mock_missing_extension(app: Sphinx, config: object) -> None:
    reason = extension_missing()
    app.config.book_uv_missing = reason or ""
    if reason is not None:
        config.autodoc_mock_imports = [*config.autodoc_mock_imports, EXTENSION]  # type: ignore[attr-defined]


def _say_extension_missing(app: Sphinx, what: str, name: str, obj: object, options: object,
                           lines: list[str]) -> None:
    if what == "module" and name.startswith("tinyloop.uv") and app.config.book_uv_missing:
        lines[:0] = [".. note::",
                     f"   This copy of the book was built without tinyloop.uv's C extension "
                     f"(``{EXTENSION}``: {app.config.book_uv_missing}). The pages of tinyloop.uv "
                     "come from its Python source; the methods its C base class defines are not "
                     "listed. Build the extension (the README's set-up) and the book again to see them.",
                     ""]


def _is_clean_rst(text: str) -> bool:
    """True when docutils parses ``text`` without a warning (roles Sphinx adds are stripped first)."""
    import re
    from docutils.core import publish_doctree
    from docutils.utils import Reporter
    plain = re.sub(r":[\w:]+:`([^`]*)`", r"``\1``", text)
    doctree = publish_doctree(plain, settings_overrides={"report_level": Reporter.SEVERE_LEVEL + 1,
                                                         "halt_level": Reporter.SEVERE_LEVEL + 1})
    return not any(m["level"] >= Reporter.WARNING_LEVEL for m in doctree.findall(nodes.system_message))


def _module_text_as_written(app: Sphinx, what: str, name: str, obj: object, options: object,
                            lines: list[str]) -> None:
    if what != "module" or "" not in lines or _is_clean_rst("\n".join(lines)):
        return
    end = lines.index("")
    if not _is_clean_rst("\n".join(lines[:end])):
        end = 1  # a first paragraph that is itself a list: only its first line is prose
    rest = lines[end:]
    lines[end:] = ["", ".. code-block:: text", "", *("    " + line if line else "" for line in rest)]


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("sphinx.ext.autodoc")
    app.add_config_value("book_uv_missing", "", "env", types=[str])
    app.connect("config-inited", _mock_missing_extension)
    app.connect("autodoc-process-docstring", _module_text_as_written)
    app.connect("autodoc-process-docstring", _say_extension_missing)
    app.connect("missing-reference", _resolve_by_last_name)
    app.connect("autodoc-process-signature", _parsable_signature)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

# docs/_ext/book_autodoc.py
#
# Two small repairs that let the API reference build under -n -W while the
# source stays written for its reader, not for Sphinx:
#
#   * A docstring says :class:`Request` where the module imported Request from
#     a sibling (tinyloop.http.connection uses tinyloop.http.parser.Request).
#     Sphinx looks only in the current module and class; when that fails we
#     search once more by the name's last part, and link if exactly one
#     documented object matches.  Two matches still warn ("more than one
#     target"), so an ambiguous name is never linked by guess.
#   * A dataclass field with ``default_factory`` shows ``=<factory>`` in its
#     signature, which Sphinx cannot parse; it is shown as ``=...``.

from __future__ import annotations

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

__all__ = ["setup"]


def _resolve_by_last_name(app: Sphinx, env: BuildEnvironment, node: pending_xref,
                          contnode: nodes.TextElement) -> nodes.reference | None:
    if node.get("refdomain") != "py" or node.get("refspecific"):
        return None
    domain = env.get_domain("py")
    retry = node.deepcopy()
    retry["refspecific"] = True  # Sphinx's own "fuzzy" search: any module, unique suffix
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                               node["reftarget"], retry, contnode)


def _parsable_signature(app: Sphinx, what: str, name: str, obj: object, options: object,
                        signature: str | None, return_annotation: str | None
                        ) -> tuple[str | None, str | None] | None:
    if signature and "<factory>" in signature:
        return signature.replace("<factory>", "..."), return_annotation
    return None


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("sphinx.ext.autodoc")
    app.connect("missing-reference", _resolve_by_last_name)
    app.connect("autodoc-process-signature", _parsable_signature)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

"""Converters: raw dataset downloads -> the BEIR layout of :mod:`zsdr.data.formats`.

Every converter has the signature ``convert_X(raw, out, **options) -> BeirCounts``: ``raw`` is the
folder holding the downloaded, already extracted files, ``out`` the BEIR folder to write. Output goes
through :class:`~zsdr.data.formats.BeirWriter`, so it is validated on exit and appears atomically;
on any error nothing is left at ``out``. Bad input raises :class:`~zsdr.io.DataError` naming the
file and line. Big files are streamed (MS MARCO has 8.8M passages); only id sets and qrels are
kept in memory.

:data:`CONVERTERS` maps the registry's converter names to the functions, one module per format:
:mod:`~zsdr.data.convert.beir`, :mod:`~zsdr.data.convert.msmarco` (passages and text triples),
:mod:`~zsdr.data.convert.trec`, :mod:`~zsdr.data.convert.lotte`, :mod:`~zsdr.data.convert.cpr`
(Multi-CPR), :mod:`~zsdr.data.convert.cmedqa2`, :mod:`~zsdr.data.convert.dureader` and
:mod:`~zsdr.data.convert.oagqa`; what they share is in :mod:`~zsdr.data.convert.common`. Each
function's docstring says which files it expects inside ``raw`` and where the format is documented.

Conventions shared by all converters

* ``pid<TAB>text`` / ``qid<TAB>text`` files are split on the first tab only (later tabs stay in
  the text); a line without a tab, or with an empty id, is an error. Surrounding blanks of texts
  are stripped unless a converter says otherwise.
* A query id given twice with the same text is written once; with a different text it is an error.
* A judgement ``(split, query, doc)`` given twice is written once (the first grade wins).
* Documents are not de-duplicated by id (that would need the whole id set of an 8.8M-passage
  corpus in memory twice); :func:`~zsdr.data.formats.validate_beir` reports repeated ids.
* A file that is a Git LFS pointer instead of data is reported as such.
"""

from __future__ import annotations

from typing import Callable

from zsdr.data.convert.beir import convert_beir
from zsdr.data.convert.cmedqa2 import convert_cmedqa2
from zsdr.data.convert.cpr import convert_cpr
from zsdr.data.convert.dureader import convert_dureader
from zsdr.data.convert.lotte import convert_lotte
from zsdr.data.convert.msmarco import convert_msmarco, convert_msmarco_triples
from zsdr.data.convert.oagqa import convert_oagqa
from zsdr.data.convert.trec import convert_trec
from zsdr.data.formats import BeirCounts

CONVERTERS: dict[str, Callable[..., BeirCounts]] = {
    "beir": convert_beir,
    "msmarco": convert_msmarco,
    "msmarco_triples": convert_msmarco_triples,
    "trec": convert_trec,
    "lotte": convert_lotte,
    "cpr": convert_cpr,
    "cmedqa2": convert_cmedqa2,
    "dureader": convert_dureader,
    "oagqa": convert_oagqa,
}

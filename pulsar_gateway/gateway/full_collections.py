"""How often the interpreter's cyclic garbage collector runs a full (generation 2) pass.

A full pass visits every container object the process holds, in one piece, holding the
GIL: no thread runs meanwhile, the event loop's included. A ListOffsets naming 49,999
topics builds about half a million dicts and lists (request, then answer), and with the
interpreter's default thresholds (700, 10, 10) a full pass started every 70,000 new
containers: decoding and answering two such requests ran 6-8 full passes of 130-300 ms
each (1.2-1.4 s in all), and a well-behaved client waited up to 1.3-2 s on a loaded
2-core machine (test_kafka_fairness). With a full pass every 100 young passes instead of
10, the same work ran none (its longest pass 5 ms) and took half the time; cyclic garbage
is still collected by the young passes when it is young, and by a full pass later.
"""

from __future__ import annotations

import gc

# (new containers before a young pass, young passes per middle, middle passes per full)
THRESHOLDS = (700, 10, 100)


def collect_fully_less_often() -> None:
    """Make full garbage-collection passes ten times rarer than the interpreter's default."""
    gc.set_threshold(*THRESHOLDS)

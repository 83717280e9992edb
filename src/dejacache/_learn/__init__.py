"""``dejacache learn``: volatile rules found by comparing two live runs, suggested on a miss.

The modules, from the pure core out: ``diffs`` (where two recorded requests differ, field by
field and span by span), ``echo`` (what a run's requests quote of its own earlier answers),
``masking`` (recorded requests as a rule set keys them), ``rules`` (the smallest set of
rules explaining the differences, none of them merging two calls answered differently),
``answers`` (when such a merge is wrong: the one test ``rules`` and ``rekey`` share),
``suggest`` (the rule a replay miss prints), ``rekey`` (cassettes keyed again under new rules),
``runs`` (the two test runs), ``command`` (the CLI). Nothing here is imported by
``import dejacache``; the engine imports ``suggest`` only when a replay misses.
"""

"""The containment oracle of the template audit (issue 34): renders observed, compared with what the audit predicts.

Not shipped: it renders templates WITHOUT a sandbox (in forked children with limits,
:meth:`tests.oracle.live.LiveRenderer.observe`). The parts:

* :mod:`.requests`: the request contexts a loader passes (messages of every role, tools, documents,
  flags, sizes from nothing to many long messages, odd strings) and the special tokens with text the
  file chooses;
* :mod:`.grammar`: Hypothesis strategies for templates: random templates over every Jinja node,
  filter, test, global and str/list/dict method, with names and sizes computed in every way the
  grammar can; mutants and recombinations of the real templates and of the known tricks;
* :mod:`.containment`: the check, at two levels: against the audit as it is (an unflagged template
  never looks up an internal name, calls nothing outside the allowlist, stays within an absolute
  cost envelope), and against ``predict()`` when the audit has it (names within the predicted set,
  work within the predicted bound);
* ``tests/test_template_oracle.py`` runs a bounded sample; ``benchmarks/template_oracle.py`` the
  scaled run.
"""

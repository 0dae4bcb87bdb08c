"""Built-in trl-doctor rules, one module per rule, named after the rule's slug.

This folder sits at the top of the repository but is installed as `trl_doctor.rules` (see the
package-dir mapping in pyproject.toml). It holds rules only: what several rules share lives in the facts
layer (`trl_doctor.facts`), and a rule imports nothing but the public API (`trl_doctor`) and that layer.
"""

if __name__ != "trl_doctor.rules":  # a top-level `rules` package would clash with other distributions
    raise ImportError(f"the trl-doctor rules must be imported as trl_doctor.rules, not {__name__!r}")

"""The sweep step's cost-aware search: successive halving over a search file's trials.

- ``space``: the search file (its space, objective and budgets), checked without the task.
- ``sampling``: the space's dimensions typed against the task, and the trials' points drawn.
- ``trials``: each point a checked grid cell with its key and its price.
- ``plan``: the rungs planned and priced before anything runs; the dry run.
- ``selection``: ranking and promotion between rungs, the frontier, the pick, the savings.
- ``folder``: the search's folder: the plan on record, each trial's rows.
- ``run``: a trial trained to a rung's stop, the selection step, the join.
- ``page``: the results for people (Markdown and HTML).

Import from the module that holds a name; this package re-exports nothing.
"""

"""Who may read what, who approved what, and the record of both.

- ``policy``: the role-based policy gate (role -> readable collections)
- ``approvals``: one approval path for every mutating operator action, bound to its inputs' hash
- ``audit``: the append-only audit trail (queries, governance events, approvals)
"""

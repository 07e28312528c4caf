"""What a cloud run may spend, apart from the course that runs it.

    cost          the estimate every spending notebook prints before its first request, the
                  cap that stops a cloud run over `budget_sampled_tokens`, and the costs
                  beside tokens (adapter archives, forward passes, exports, Sailboxes)
    spend         what each spending notebook samples, trains and creates, counted from its
                  settings: the check cell (`helpers.settings`) prints it through `cost`
    prices.json   the prices, with their date and source, once filled in (none is known offline)

It stands below the course: it imports only `kimi/` (the assumed size of an adapter archive),
and notebook 04's loop calls `cost.check_spent` to stop a cloud run once it passes its budget.
"""

"""What a cloud run may spend, apart from the course that runs it.

    cost          the estimate every spending notebook prints before its first request, the
                  cap that stops a cloud run over `budget_sampled_tokens`, and the costs
                  beside tokens (adapter archives, forward passes, exports, Sailboxes)
    prices.json   the prices, with their date and source, once filled in (none is known offline)

Each notebook's own count of what it samples and trains is declared with its parameters
(`helpers.notebook_parameters`), which call `cost` from the check cell.
"""

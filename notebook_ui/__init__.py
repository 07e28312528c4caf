"""How the course behaves inside a notebook kernel: errors as one sentence, interrupts that
reach an awaiting cell and close a loop's bar, progress that suits JupyterLab or papermill,
tables shown whole.

    progress       a training loop's progress: a tqdm bar in JupyterLab, a plain line per
                   step under papermill; it remembers which cell's loop an interrupt closes
    short_errors   the exception types it is given, and interruptions, shown as one sentence
                   in IPython; the signal wakeup fd that lets the stop button reach a cell
                   that awaits something quiet
    display        tables shown whole, and two known lines of Tinker's log dropped

Kernel plumbing, not a lesson: it imports none of the course's packages. `helpers` installs
the short errors with the course's own types when it is imported (`helpers.errors`).
"""

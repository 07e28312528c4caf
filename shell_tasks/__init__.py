"""Notebook 08's sandboxed shell tasks: a Harbor task, run by a policy in a sandbox, graded.

    harbor_task      read a task in Harbor's layout and run its verifier (tests/test.sh)
    shell_env        the one-turn RL environment whose action is a bash script
    scripted_policy  the local backend's stand-in for a model that writes shell scripts
    sandboxes        where the sandboxes come from: Sailboxes without network, or the local one
    sandbox_cells    notebook cells that need a sandbox, skipped in one line where none can run
    task_family      many instances of small shell tasks, generated from a seed per split
    shell_rl         notebook 04's loop on those tasks, each rollout in its own sandbox

The local sandbox (`local_stack.client.sailbox`) reads a task's working directory with
`harbor_task.dockerfile_workdir`, as Sail's factory reads the task's image from its layout.
"""

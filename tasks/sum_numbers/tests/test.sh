#!/bin/bash
# Verifier for sum_numbers, in Harbor's contract: write the reward (1 or 0) to
# /logs/verifier/reward.txt. The expected sum lives here, not next to the input, so a
# policy that rewrites numbers.txt cannot change the answer it is graded against.
# Keep it equal to the sum of environment/numbers.txt (tests/stack/test_sandbox.py checks).
# The course's grader (shell_tasks.harbor_task.run_verifier) runs this in an emptied
# /logs/verifier and counts only a reward this script wrote.
EXPECTED_SUM=1827
REWARD_FILE=/logs/verifier/reward.txt

if [ ! -f /app/sum.txt ]; then
    echo "FAIL: /app/sum.txt does not exist"
    echo 0 > "$REWARD_FILE"
    exit 1
fi

actual=$(tr -d '[:space:]' < /app/sum.txt)
if [ "$actual" = "$EXPECTED_SUM" ]; then
    echo "PASS: sum is $EXPECTED_SUM"
    echo 1 > "$REWARD_FILE"
else
    echo "FAIL: expected $EXPECTED_SUM, got '$actual'"
    echo 0 > "$REWARD_FILE"
    exit 1
fi

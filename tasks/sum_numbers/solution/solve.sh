#!/bin/bash
# Reference solution: Harbor's oracle agent runs this to prove the task is solvable.
awk '{ total += $1 } END { print total }' /app/numbers.txt > /app/sum.txt

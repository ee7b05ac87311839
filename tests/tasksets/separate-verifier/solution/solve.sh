#!/bin/bash
mkdir -p /app/out
echo 42 > /app/out/answer.txt
echo snapshot > /app/state.txt
echo left > /app/undeclared.txt

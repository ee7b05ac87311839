#!/bin/bash
touch /app/done.txt
no-such-tool --make-it-so

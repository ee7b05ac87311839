#!/bin/bash
touch /app/done.txt

#!/bin/bash
seq 1 5 > /app/count.txt

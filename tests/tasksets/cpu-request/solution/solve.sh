#!/bin/bash
nproc > /app/cpus.txt

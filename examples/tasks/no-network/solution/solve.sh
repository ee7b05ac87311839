#!/bin/bash
echo offline > /app/offline.txt

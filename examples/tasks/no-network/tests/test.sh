#!/bin/bash
# Reward 1 when /app/offline.txt holds "offline" AND the sandbox has no network interface
# but lo, i.e. network_mode = "no-network" was honoured. Otherwise 0.
mkdir -p /logs/verifier
interfaces=$(ls /sys/class/net | tr '\n' ' ' | sed 's/ *$//')
echo "network interfaces: ${interfaces}"
if [ "$interfaces" != "lo" ]; then
    echo "the sandbox has a network interface besides lo; network_mode = no-network was not applied"
    echo 0 > /logs/verifier/reward.txt
elif [ -f /app/offline.txt ] && [ "$(tr -d '[:space:]' < /app/offline.txt)" = "offline" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit 0

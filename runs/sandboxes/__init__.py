"""Docker sandboxes that trials run in, and the offline base images they start from."""

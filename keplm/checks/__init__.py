"""Knowledge-dependence checks: synthetic tasks whose labels live in the KG, and counterfactual KG edits."""

"""What the verbs report: rebuild.json and report.json, recover's plan, the verdict, the inspection of a store."""

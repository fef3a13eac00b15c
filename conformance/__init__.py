"""dt's conformance suite: an op catalogue any backend is certified against.

    dt conformance --backend NAME [--ops PATTERN] [--dtypes ...] [--full] [--report FILE.json|FILE.md]
    pytest conformance --dt-backend NAME

`conformance.catalogue` holds the cases (data), `conformance.runner` runs and reports them,
`conformance.vendor` reads a backend's skip/xfail file, `conformance.broken` holds mutant
backends the suite must catch. docs/backend-guide.md walks through certifying a backend.
"""

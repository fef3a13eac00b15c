"""dt's conformance suite: an op catalogue any backend is certified against.

    dt conformance --backend NAME [--ops PATTERN] [--dtypes ...] [--full] [--report FILE.json|FILE.md]
    pytest dt/conformance --dt-backend NAME

`dt.conformance.catalogue` holds the cases (data), `dt.conformance.runner` runs and reports them,
`dt.conformance.vendor` reads a backend's skip/xfail file, `dt.conformance.broken` holds mutant
backends the suite must catch. docs/backend-guide.md walks through certifying a backend.
"""

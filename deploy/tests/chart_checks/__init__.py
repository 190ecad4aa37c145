"""The Helm chart's offline checks, one module per concern, run in order by
deploy/tests/check_chart.py (the entry point scripts/test-deploy.sh calls):

    report     the @check decorator and the results it records
    render     the chart, `helm template`, and its values as resolved
    objects    finding rendered objects and their parts
    schemas    Kubernetes schema and custom resource validation
    workloads  workers, fleet-lag, the topic job, monitoring, existing Secrets
    autoscaling  the HPA, the adapter rule and KEDA, interactive lane
    lanes      the bulk lane's metric, trigger and queries
    secrets    secret values only in Secrets (NOTES.txt included)
    redis_tls  the Redis TLS mounts and their absence
    release    a second release's prefixes, topics, Strimzi, Redis ACL
    failures   bad values that must make `helm template` fail
"""

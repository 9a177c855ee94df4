module agentworkers.local/golden

go 1.26

module github.com/agentserve/sessionaffinity

go 1.24.0

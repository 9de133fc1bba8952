module github.com/agentserve/sessionaffinity/internal/tools

go 1.24.0

require golang.org/x/mod v0.30.0

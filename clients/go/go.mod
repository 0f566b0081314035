module github.com/dq-project/dq/clients/go

go 1.19

module github.com/floodgate-go/floodgate

go 1.24

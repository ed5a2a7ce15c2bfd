module tinyloop/benchmarks/peers/go

go 1.21

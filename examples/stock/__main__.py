from examples.stock.program import main

main()

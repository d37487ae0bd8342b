from examples.readiness.program import main

main()

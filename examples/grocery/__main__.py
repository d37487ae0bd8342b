from examples.grocery import main

main()

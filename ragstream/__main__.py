from ragstream.cli import main

main()

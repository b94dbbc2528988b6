from ragstream.interfaces.cli import main

main()

from encoder.cli import main

main()

from training.cli import main

main()

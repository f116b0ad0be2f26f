from crawlhub.cli import main

main()

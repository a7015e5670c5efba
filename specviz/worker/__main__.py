from specviz.worker.server import main

main()

"""The data of a run and the one chunked gallery pipeline: the dataset's splits and the training
selection, the gallery sources, and embed → parts → index for every gallery."""

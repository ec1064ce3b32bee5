"""zsdr.tables"""

{#- The distinct-buyer states per product as stored (uniqCombined, sql/0016), unmerged: the
    models downstream merge them per product and over all products. A state cannot lose a
    buyer, so a product with a voided order (sql/0026) is counted again from its orders
    without the voided ones. -#}

with

voided_products as (

    select distinct product_id from {{ source('toplist', 'orders') }}
    where event_id in (select event_id from {{ source('toplist', 'order_voids') }})

)

select product_id, buyers from {{ source('toplist', 'sale_buyers_by_product') }}
where product_id not in (select product_id from voided_products)

union all

select product_id, uniqCombinedState(buyer_id) as buyers from {{ ref('stg_toplist__orders') }}
where product_id in (select product_id from voided_products)
group by product_id
